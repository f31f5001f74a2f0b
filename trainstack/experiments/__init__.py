"""The experiment loop under the verbs: a job checked and queued or cancelled, a cluster woken (local or cloud), the jobs listed."""
