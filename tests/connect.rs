//! `nats_topology::connect` survives a broker that is down when the service starts: it returns
//! at once, and the client connects as soon as a server listens.

use std::net::TcpListener;
use std::time::Duration;

use futures::StreamExt;
use nats_topology::async_nats::{self, client::Request, connection::State};
use nats_topology_testkit::NatsServer;

#[tokio::test]
async fn connect_with_the_broker_down_then_up() {
    // A loopback port on which nothing listens (bound, read, released).
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        listener.local_addr().expect("local address").port()
    };
    let url = format!("nats://127.0.0.1:{port}");

    // Plain `async_nats::connect` gives up at once: the failure `connect` exists to survive.
    assert!(async_nats::connect(url.as_str()).await.is_err());

    let client = tokio::time::timeout(Duration::from_secs(10), nats_topology::connect(&url))
        .await
        .expect("connect returns while no server listens")
        .expect("a valid server list");
    assert_ne!(client.connection_state(), State::Connected);

    let server = NatsServer::start_on_port(port)
        .await
        .expect("a server on the port the client is trying");

    // Something to answer, on its own connection, subscribed before the request is sent.
    let responder = async_nats::connect(server.url()).await.expect("responder");
    let mut requests = responder
        .subscribe("connect.echo")
        .await
        .expect("subscribe");
    // `flush` only writes the buffer out; the server has processed the subscription once a
    // message this connection publishes afterwards comes back to it (it handles one
    // connection's commands in order).
    let mut probe = responder
        .subscribe("connect.probe")
        .await
        .expect("subscribe");
    responder
        .publish("connect.probe", "".into())
        .await
        .expect("publish");
    tokio::time::timeout(Duration::from_secs(10), probe.next())
        .await
        .expect("the responder's own message comes back")
        .expect("the probe subscription is open");
    let answering = tokio::spawn(async move {
        let request = requests.next().await.expect("a request");
        let reply = request.reply.expect("a reply subject");
        let mut answer = b"echo: ".to_vec();
        answer.extend_from_slice(&request.payload);
        responder
            .publish(reply, answer.into())
            .await
            .expect("answer");
        responder.flush().await.expect("flush");
    });

    // Sent whether or not the client has reconnected yet: it waits in the client's queue.
    let request = Request::new()
        .payload("ping".into())
        .timeout(Some(Duration::from_secs(60)));
    let answer = match client.send_request("connect.echo", request).await {
        Ok(answer) => answer,
        Err(e) => panic!(
            "the request is answered once the client has connected: {e:?}; the client is on {:?} (server {}), state {:?}",
            client.server_info().port,
            server.url(),
            client.connection_state()
        ),
    };
    assert_eq!(&answer.payload[..], b"echo: ping");
    assert_eq!(client.connection_state(), State::Connected);
    answering.await.expect("responder task");
}

#[tokio::test]
async fn a_malformed_server_list_is_an_error() {
    assert!(nats_topology::connect(" , ").await.is_err());
    assert!(
        nats_topology::connect("nats://127.0.0.1:notaport")
            .await
            .is_err()
    );
}
