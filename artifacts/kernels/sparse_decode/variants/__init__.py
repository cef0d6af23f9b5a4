"""Teaching variants of sparse_decode: simpler, slower, standalone on purpose (the production kernel is
the package above)."""
