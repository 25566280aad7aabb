"""Ingestion: ``discover.py`` finds and decodes files (every failure a skip reason),
``sources.py`` names them, ``chunking.py`` cuts their blocks into chunks, ``links.py`` finds the
titles and headings a chunk mentions, ``pipeline.py`` runs one ingest (the text stored first,
the vectors filled in after) with its worker processes."""
