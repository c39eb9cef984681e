"""The viewer's data: tracks, level-of-detail pyramid, windows, details and flame graphs."""
