"""What a skipped test needs: the words its skip says."""

NEEDS_TORCH_EXTRA = ("the torch extra is not installed: pip install -e '.[torch]' (a CPU build "
                     "of torch is enough: README.md says how)")
