//! Tests of the Plan engine.
