from reindex.cli import main

main()
