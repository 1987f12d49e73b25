"""The sample pool of finished episodes and the policies that decide when it triggers training."""
