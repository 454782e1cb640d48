//! Refused: a handler inside an `impl` block (even without `self`): the attribute goes on a
//! free function. A proc macro cannot see the `impl` around it, so the messages are rustc's;
//! the docs of `#[queue_consumer]` quote them with the fix, and this case keeps them true.

use nats_topology::{HandlerError, queue_consumer};

pub struct Billing;

impl Billing {
    #[queue_consumer(stream = "ORDERS", group = "billing")]
    async fn on_order(event: String) -> Result<(), HandlerError> {
        let _ = event;
        Ok(())
    }
}

fn main() {}
