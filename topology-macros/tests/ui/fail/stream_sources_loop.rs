//! Refused: two streams that source from each other by type (a loop: messages would come
//! back to the stream they left). The compiler cannot build the one without the other: the
//! error is rustc's own cycle error (E0391), which no macro can word, but it points at both
//! attributes and at each `sources = [..]` element closing the loop. (Named by string, the
//! same loop is reported at start-up with its path, `LEFT <- RIGHT <- LEFT`.)

use nats_topology::stream;

#[stream(name = "LEFT", subjects = ["left.>"], sources = [Right])]
pub struct Left;

#[stream(name = "RIGHT", subjects = ["right.>"], sources = [Left])]
pub struct Right;

fn main() {}
