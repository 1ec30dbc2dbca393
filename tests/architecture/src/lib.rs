//! The architecture suite lives in `tests/architecture.rs`: it reads the workspace's source
//! files and checks the `Architecture Invariant:` lines of `ARCHITECTURE.md` on them, so it
//! builds without the product's crates.
