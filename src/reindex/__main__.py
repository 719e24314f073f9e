from reindex.cli import main

__all__ = []

if __name__ == "__main__":  # guarded: Dask's spawned worker processes re-import the main module
    main()
