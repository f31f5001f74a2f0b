"""A job's state as its nodes record it in the bucket: status objects read with bounds, told as a report."""
