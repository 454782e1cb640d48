//! What a partitioned group cannot migrate from, refused before its stream routes by
//! partition (its new routing would starve what cannot be read to its end), and shown by
//! `plan`: a push consumer; a partitioned group not declared as one (`migrate_from_partitions`),
//! or with another count than declared; old partitions whose filters would read what the new
//! layout stores (docs/PARTITIONS.md, "Changing the count").

use async_nats::jetstream::consumer;
use topology_core::subject::overlaps;

use super::{ProvisionError, ProvisionErrorKind, Provisioner};

/// A consumer a partitioned group migrates from, as the refusals read it.
#[derive(Debug, Clone)]
pub(crate) struct Superseded<'a> {
    pub(crate) stream: &'a str,
    /// The old consumer.
    pub(crate) old: &'a str,
    /// When it is a partition of an old group: the group, the partition, how many it has.
    pub(crate) partition: Option<(&'a str, u16, u16)>,
    /// The partitioned group migrating from it.
    pub(crate) group: &'a str,
    /// The filters of the group's partitions.
    pub(crate) filters: Vec<&'a str>,
}

impl Provisioner {
    /// `Ok` when `superseded` can be read to its end by its group (or is gone: read already);
    /// [`ProvisionErrorKind::Unsupported`] naming what is wrong and what to declare otherwise.
    pub(crate) async fn refuse_superseded(
        &self,
        superseded: &Superseded<'_>,
    ) -> Result<(), ProvisionError> {
        let Superseded {
            stream, old, group, ..
        } = *superseded;
        let refuse = |message: String| {
            Err(ProvisionError::new(ProvisionErrorKind::Unsupported, stream, message).consumer(old))
        };
        let info = self.read_consumer(stream, old).await?;
        if info
            .as_ref()
            .is_some_and(|i| i.config.deliver_subject.is_some())
        {
            return refuse(format!(
                "`{group}` migrates from a push consumer, which a partitioned group cannot read \
                 to its end: migrate it to a pull queue consumer first (`migrate_from` without \
                 `partitions`), then to the partitions"
            ));
        }
        let Some((old_group, index, of)) = superseded.partition else {
            if info.is_none()
                && self
                    .read_consumer(stream, &format!("{old}-p0"))
                    .await?
                    .is_some()
            {
                return refuse(format!(
                    "`{group}` migrates from `{old}`, a partitioned group: declare how many \
                     partitions it has (`migrate_from_partitions = N`), and route the new count \
                     through a layout of its own (docs/PARTITIONS.md, \"Changing the count\")"
                ));
            }
            return Ok(());
        };
        let Some(info) = info else {
            if self.read_consumer(stream, old_group).await?.is_some() {
                return refuse(format!(
                    "`{group}` declares `migrate_from_partitions`, but `{old_group}` is a plain \
                     queue consumer: remove `migrate_from_partitions`"
                ));
            }
            // Read to its end and deleted already (or never there): nothing to read.
            return Ok(());
        };
        let beyond = format!("{old_group}-p{of}");
        if index + 1 == of && self.read_consumer(stream, &beyond).await?.is_some() {
            return refuse(format!(
                "`{group}` declares `migrate_from_partitions = {of}`, but `{old_group}` has more \
                 partitions (`{beyond}` exists): declare its count"
            ));
        }
        let filters = filters_of(&info);
        for new in &superseded.filters {
            if let Some(filter) = filters.iter().find(|f| overlaps(f, new)) {
                return refuse(format!(
                    "the new partitions' filter `{new}` reads subjects that `{old}` reads \
                     (`{filter}`): stored under both counts, the messages of one key would reach \
                     two partitions. Route the new count through a layout of its own in the \
                     stream's `subject_transform`, e.g. a literal token the old layout lacks \
                     (docs/PARTITIONS.md, \"Changing the count\")"
                ));
            }
        }
        Ok(())
    }
}

/// The filter subjects of a consumer on the server.
fn filters_of(info: &consumer::Info) -> Vec<&str> {
    let config = &info.config;
    let one = (!config.filter_subject.is_empty()).then_some(config.filter_subject.as_str());
    one.into_iter()
        .chain(config.filter_subjects.iter().map(String::as_str))
        .collect()
}
