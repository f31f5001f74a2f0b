"""The command line: one module per verb, each parsing its arguments and calling the layers below."""
