"""Dense retrieval (optional): packaged sentence encoders, the vector index written with entries, its write-behind
writer."""
