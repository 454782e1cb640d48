//! A slot's states.

use super::*;

fn slot() -> Slot {
    let shared = Arc::new(Shared::new(Vec::<String>::new()));
    Slot::new(
        "ORDERS",
        "workers",
        "h",
        true,
        Duration::from_secs(60),
        shared,
    )
}

#[test]
fn a_leader_here_cut_off_stalls_a_running_consumer_until_its_info_names_another() {
    let slot = slot();
    let cut = (
        Duration::from_secs(3),
        "this server (n0) is cut off".to_owned(),
    );
    slot.transition(ConsumerState::Running);
    slot.cut_off(Some(&cut));
    assert!(slot.is_cut_off());
    match slot.state() {
        ConsumerState::Stalled { silent_for, cause } => {
            assert_eq!(silent_for, Duration::from_secs(3));
            assert!(
                cause.contains("cut off") && cause.contains("jetstream"),
                "{cause}"
            );
        }
        other => panic!("stalled, not {other}"),
    }
    slot.cut_off(None);
    assert!(!slot.is_cut_off());
    assert_eq!(slot.state(), ConsumerState::Running);
    // Only a live consumer: a draining one stays draining, and is not run again.
    slot.transition(ConsumerState::Draining);
    slot.cut_off(Some(&cut));
    assert_eq!(slot.state(), ConsumerState::Draining);
    slot.cut_off(None);
    assert_eq!(slot.state(), ConsumerState::Draining);
}
