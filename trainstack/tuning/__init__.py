"""Hyperparameter tuning: AI Platform's spec, the study in the bucket, trials on the queue."""
