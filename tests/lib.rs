//! Workspace-level integration test support.
