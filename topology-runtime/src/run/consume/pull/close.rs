//! How a session ends: it stops listening to its inbox, after what is on its way, and says
//! what it received and did not hand out (to be given back); a pinned session then releases
//! its pin.

use futures::{FutureExt, StreamExt};
use tokio::time::Instant;

use super::super::ack::Fetched;
use super::{Puller, priority};

impl Puller {
    /// Unsubscribes, so the server stops delivering to the open requests (it drops requests
    /// nobody listens to), and returns what arrived but was not handed out, including what
    /// arrives before the unsubscription takes effect.
    pub(in crate::run::consume) async fn close(mut self) -> Vec<Fetched> {
        // The session ends: its state is its supervisor's to say (draining, retrying).
        self.liveness.forget();
        let unstarted = self.close_inbox().await;
        let unstarted = self.may_hand_back(unstarted).await;
        // Once the inbox is closed, no request of this session can take the pin again.
        if let Some(pin) = self.priority.pin() {
            priority::unpin(&self.common.client, &self.unpin, pin, self.close_wait).await;
        }
        unstarted
    }

    /// Closes the inbox; returns what arrived but was not handed out.
    async fn close_inbox(&mut self) -> Vec<Fetched> {
        let mut unstarted: Vec<_> = self.arrived.drain(..).collect();
        while let Some(Some(message)) = self.subscriber.next().now_or_never() {
            if let Ok(Some(fetched)) = self.take(message) {
                unstarted.push(fetched);
            }
        }
        if self.requests.is_empty() {
            // Nothing is asked for: nothing more can arrive.
            return unstarted;
        }
        // A partition's session closes once its handlers settled (see `pump`): the ack of the
        // last one brings the partition's next message to this session's request, which is
        // awaited here before the unsubscription. Sent after it, it would go nowhere and hold
        // the partition until its `ack_wait`.
        if self.fence.is_some() && unstarted.is_empty() && self.pending_after_last > 0 {
            let next = tokio::time::timeout(self.close_wait, self.subscriber.next()).await;
            if let Ok(Some(message)) = next
                && let Ok(Some(fetched)) = self.take(message)
            {
                unstarted.push(fetched);
            }
        }
        if self.subscriber.drain().await.is_err() {
            return unstarted;
        }
        let deadline = Instant::now() + self.close_wait;
        while let Ok(Some(message)) =
            tokio::time::timeout_at(deadline, self.subscriber.next()).await
        {
            if let Ok(Some(fetched)) = self.take(message) {
                unstarted.push(fetched);
            }
        }
        unstarted
    }
}
