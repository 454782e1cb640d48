use nats_topology::{HandlerError, subscription};

#[subscription(subject = "cache.invalidate", group = "cache", each_instance)]
async fn invalidate(key: String) -> Result<(), HandlerError> {
    let _ = key;
    Ok(())
}

fn main() {}
