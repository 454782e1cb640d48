//! Bind-only ([`Provisioner::bind_only`]): a queue consumer an operator provisioned is
//! verified, never created or changed.

use async_nats::jetstream::consumer;
use topology_core::model::ConsumerDecl;

use super::reconcile::{self, Action};
use super::{ProvisionError, ProvisionErrorKind, Provisioner};

impl Provisioner {
    /// Bind-only: the queue consumer must be there (an operator provisioned it); differences
    /// from the declaration are the operator's to apply, and said in the log (what
    /// [`reconcile::bound_consumer`] decides, which `plan` prints).
    pub(super) async fn verify_bound(
        &self,
        stream: &str,
        name: &str,
        decl: &ConsumerDecl,
        declared: &consumer::Config,
    ) -> Result<consumer::Info, ProvisionError> {
        let info = self.read_consumer(stream, name).await?;
        let action = reconcile::bound_consumer(decl, declared, info.as_ref().map(|i| &i.config));
        let (Some(info), Action::Bound(Ok(differences))) = (info, action) else {
            return Err(ProvisionError::new(
                ProvisionErrorKind::ExternalNotReady,
                stream,
                "the consumer does not exist, and this runtime is bind-only (its streams and \
                 consumers are provisioned by an operator, never here): provision it with the \
                 operator's credentials (the CLI's `provision`, or infrastructure as code); this \
                 consumer waits, not ready, until it is there",
            )
            .consumer(name));
        };
        if !differences.is_empty() {
            tracing::warn!(
                stream,
                consumer = name,
                ?differences,
                "the consumer on the server differs from the declaration; bind-only: not \
                 changed here (provision it again with the operator's credentials)"
            );
        }
        Ok(info)
    }
}
