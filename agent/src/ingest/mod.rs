//! Ingest: turning bytes from sockets, files and captures into events.
