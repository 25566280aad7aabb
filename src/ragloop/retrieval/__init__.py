"""Retrieval: the knowledge base (ingestion, chunking, stores, embedders, fusion, links)."""
