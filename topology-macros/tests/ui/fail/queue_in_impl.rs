//! Refused: a handler inside an `impl` block (even without `self`): the attribute goes on a
//! free function. The macro is given the function alone; it finds the `impl` in the source
//! file, so the one error names the fix instead of rustc's "`const` items in this context need
//! a name" and "cannot find function".

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
