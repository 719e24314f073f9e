"""Storage backends: the vector store and the object store for state (plans, manifests, locks)."""
