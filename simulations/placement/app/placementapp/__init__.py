"""The placement deployment test app (issue 17)."""
