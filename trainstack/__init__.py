"""trainstack: GPU and TPU training on Google Cloud, declared with Pulumi.

Importing the package creates no resources; :mod:`trainstack.cloud.program` builds the stack.
"""
