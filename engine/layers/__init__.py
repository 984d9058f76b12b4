"""Building blocks of the decoder."""
