"""Replication: follower fetchers, ISR and high-watermark bookkeeping, controller."""
