//! Refused: a placement that names nothing, a tag the server cannot match, a placement that is
//! not a block, a key a placement does not have, and a placement on an external stream.

#![allow(unused_imports)]

use nats_topology::stream;

#[stream(name = "EMPTY", subjects = ["empty.>"], placement = {})]
pub struct Empty;

#[stream(name = "SPACED", subjects = ["spaced.>"], placement = { cluster = "east", tags = ["fast disk", ""] })]
pub struct Spaced;

#[stream(name = "FLAT", subjects = ["flat.>"], placement = "east")]
pub struct Flat;

#[stream(name = "REGION", subjects = ["region.>"], placement = { region = "east" })]
pub struct Region;

#[stream(name = "EMAIL", subjects = ["email.>"], external, placement = { cluster = "east" })]
pub struct Email;

fn main() {}
