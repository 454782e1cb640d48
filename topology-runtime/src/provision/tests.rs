use super::*;

fn instance(created: &str, last_sequence: u64) -> StreamInstance {
    StreamInstance {
        name: "S".to_owned(),
        created: created.into(),
        last_sequence,
    }
}

#[test]
fn a_resume_point_holds_in_its_own_stream_instance_only() {
    let point = ResumePoint {
        stream: instance("t1", 100),
        after: 100,
    };
    // The same instance, grown (or purged: the first sequence does not matter).
    assert_eq!(point.start_in(&instance("t1", 150)), Start::After(100));
    assert_eq!(point.start_in(&instance("t1", 100)), Start::After(100));
    // Deleted and created again: sequences start again at 1.
    assert!(matches!(
        point.start_in(&instance("t2", 150)),
        Start::Fresh(_)
    ));
    // Past the last sequence: not the stream the point was read in.
    assert!(matches!(
        point.start_in(&instance("t1", 99)),
        Start::Fresh(_)
    ));
    let other_name = StreamInstance {
        name: "T".to_owned(),
        ..instance("t1", 150)
    };
    assert!(matches!(point.start_in(&other_name), Start::Fresh(_)));
}

/// An answer the provisioner cannot read (here: a stream's info read as another shape) is
/// tried a few times, then reported with the request and the answer, as a kind a
/// supervisor retries with its backoff rather than in a loop.
#[tokio::test]
async fn an_answer_of_an_unexpected_shape_is_reported_after_a_few_attempts() {
    #[derive(Debug, serde::Deserialize)]
    struct OtherShape {
        #[allow(dead_code)]
        not_a_stream_field: u64,
    }
    let server = nats_topology_testkit::NatsServer::start()
        .await
        .expect("nats-server starts");
    let client = async_nats::connect(server.url()).await.expect("connect");
    let policy = RetryPolicy {
        base: std::time::Duration::from_millis(1),
        ..RetryPolicy::default()
    };
    let provisioner = Provisioner::new(client, policy);
    let stream = topology_core::model::StreamDecl::new("ODD", &["odd.>"]);
    provisioner
        .reconcile_stream(&stream, &[])
        .await
        .expect("created");
    let error = provisioner
        .client
        .read::<OtherShape>(
            "ODD",
            None,
            "STREAM.INFO.ODD".to_owned(),
            async_nats::jetstream::ErrorCode::STREAM_NOT_FOUND,
        )
        .await
        .expect_err("not the shape asked for");
    assert_eq!(error.kind(), ProvisionErrorKind::UnexpectedAnswer);
    assert_eq!(error.attempts(), client::UNEXPECTED_ANSWER_ATTEMPTS);
    assert!(error.is_transient(), "a supervisor retries it with backoff");
    let text = error.to_string();
    assert!(text.contains("$JS.API.STREAM.INFO.ODD"), "{text}");
    assert!(text.contains("\"config\""), "the answer is shown: {text}");
}
