//! The examples of the `#[service]`, `#[endpoint]` and `#[subscription]` docs
//! (`topology-macros/docs/*.md`), as written there.

mod service_doc {
    use nats_topology::service;

    /// The version is the crate's (`CARGO_PKG_VERSION`) unless declared.
    #[service(name = "members", description = "Member lookups")]
    pub struct Members;

    #[service(
        name = "billing",
        version = "2.0.0-rc.1",
        queue_group = "billing-workers",
        metadata = [("team", "payments")],
    )]
    pub struct Billing;
}

mod endpoint_doc {
    use nats_topology::{endpoint, service, RequestContext, ServiceError, State};
    #[derive(serde::Deserialize)]
    pub struct GetMember { pub id: u64 }
    #[derive(serde::Serialize)]
    pub struct Member { pub id: u64 }
    pub struct Db;

    #[service(name = "members", version = "1.2.0")]
    pub struct Members;

    #[endpoint(service = Members, subject = "members.get")]
    async fn get_member(request: GetMember, cx: RequestContext) -> Result<Member, ServiceError> {
        if request.id == 0 {
            return Err(ServiceError::bad_request("ids start at 1"));
        }
        let _ = cx.subject();
        Ok(Member { id: request.id })
    }

    #[endpoint(service = Members, subject = "members.*.rename", name = "rename",
               group = "renamers", concurrency = 4, timeout = "5s")]
    async fn rename_member(name: String, db: State<Db>) -> Result<(), std::io::Error> {
        let _ = (name, db);
        Ok(())
    }
}

mod subscription_doc {
    use nats_topology::{subscription, HandlerError, RequestContext};

    #[subscription(subject = "jobs.cleanup", group = "cleaners", concurrency = 2)]
    async fn cleanup(job: String, cx: RequestContext) -> Result<(), HandlerError> {
        let _ = (job, cx.subject());
        Ok(())
    }

    #[subscription(subject = "cache.invalidate.>", each_instance)]
    async fn invalidate(key: Vec<u8>) -> Result<(), HandlerError> {
        let _ = key;
        Ok(())
    }
}

fn main() {
    let topology = nats_topology::Topology::from_registry();
    assert_eq!(topology.services().len(), 3);
    assert_eq!(topology.endpoints().len(), 2);
    assert_eq!(topology.subscriptions().len(), 2);
}
