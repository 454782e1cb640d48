//! Priority groups need nats-server 2.11: an older server ignores the unknown fields, so a
//! pinned consumer would silently deliver to every instance. It is refused at start-up,
//! naming the server's version.

use topology_core::model::ConsumerDecl;

use super::{ProvisionError, ProvisionErrorKind, Provisioner};

impl Provisioner {
    /// Refuses a queue consumer declaring a priority on a server without priority groups.
    pub(crate) fn check_priority_supported(
        &self,
        stream: &str,
        decl: &ConsumerDecl,
    ) -> Result<(), ProvisionError> {
        let Some((queue, priority)) = decl.as_queue().and_then(|q| q.priority.map(|p| (q, p)))
        else {
            return Ok(());
        };
        let version = self.server();
        if version.has_priority_groups() == Some(false)
            && let Some(partitioning) = queue.partitioned
        {
            // One partition of a partitioned group: its pin is what keeps the partition with one
            // replica, and its order.
            return Err(ProvisionError::new(
                ProvisionErrorKind::Unsupported,
                stream,
                format!(
                    "`partitions = {}` needs priority groups with a pinned client, which \
                     nats-server {version} lacks (2.11 or newer; on an older server every \
                     replica would read every partition, and the order per key would not \
                     hold): upgrade the servers, or remove `key` and `partitions` for a queue \
                     consumer without order per key",
                    partitioning.partitions
                ),
            )
            .consumer(queue.group));
        }
        if version.has_priority_groups() == Some(false) {
            return Err(ProvisionError::new(
                ProvisionErrorKind::Unsupported,
                stream,
                format!(
                    "`priority = \"{}\"` needs priority groups, which nats-server {version} \
                     lacks (2.11 or newer; an older server would ignore the policy and deliver \
                     to every instance): upgrade the servers, or remove `priority` and its keys",
                    priority.policy()
                ),
            )
            .consumer(queue.group));
        }
        Ok(())
    }
}
