"""What a run leaves behind and the hooks around its loop: the record, checkpoints, saved models, trackers."""
