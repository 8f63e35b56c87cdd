//! The engine's fuzz targets (`cargo xtask fuzz` runs them with many more cases): the Plan
//! engine's first pass and selectors ([`plan`]), the updater's parsers and rules
//! ([`updater`]), the signal-vs-plan match ([`authorize`]).

mod authorize;
mod plan;
mod updater;
