"""Everything that knows the CS224N task files: readers, metrics, prediction files, the training loop and CLIs."""
