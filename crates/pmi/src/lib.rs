//! PMI-1 wire protocol.
