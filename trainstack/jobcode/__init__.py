"""The code a job runs: a team's package or image, and the archives `pulumi up` uploads for nodes."""
