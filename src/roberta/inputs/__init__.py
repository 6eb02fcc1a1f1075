"""Reading the inputs a user hands in, below everything that reads them: `text` reads text files,
TSV/JSONL columns and corpora (a path, a folder, a glob), `arrow` reads Parquet, Arrow IPC and
`datasets.save_to_disk` folders by column, a bounded batch of rows at a time."""
