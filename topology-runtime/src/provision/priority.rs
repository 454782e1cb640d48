//! Priority groups need nats-server 2.11: an older server ignores the unknown fields, so a
//! pinned consumer would silently deliver to every instance. It is refused at start-up,
//! naming the server's version.

use topology_core::model::ConsumerDecl;
use topology_core::priority::PRIORITY_SINCE;

use super::{ProvisionError, ProvisionErrorKind, Provisioner};

/// Whether `version` (a server's) has priority groups; `None` if it does not parse (then the
/// server's own answer tells).
pub(crate) fn has_priority_groups(version: &str) -> Option<bool> {
    super::parse_version(version).map(|found| found >= PRIORITY_SINCE)
}

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
        let version = self.client.jetstream().client().server_info().version;
        if has_priority_groups(&version) == Some(false) {
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

#[cfg(test)]
mod tests {
    use super::has_priority_groups;

    #[test]
    fn since_2_11() {
        assert_eq!(has_priority_groups("2.10.26"), Some(false));
        assert_eq!(has_priority_groups("2.11.0"), Some(true));
        assert_eq!(has_priority_groups("2.12.0-RC.1"), Some(true));
        assert_eq!(has_priority_groups("dev"), None);
    }
}
