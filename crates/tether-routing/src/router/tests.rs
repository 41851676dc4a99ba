//! Router unit tests: one router, frames in, frames out.
