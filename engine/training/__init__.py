"""Backend-neutral training pieces: batch building, metrics logging and checkpoint layout."""
