"""Other tools' job formats: AI Platform jobs read in, Vertex AI custom jobs and Terraform plans written out."""
