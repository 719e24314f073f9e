from reindex.cli import run

__all__ = []

if __name__ == "__main__":  # guarded: Dask's spawned worker processes re-import the main module
    run()
