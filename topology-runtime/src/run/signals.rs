//! SIGINT (Ctrl-C) and SIGTERM for `Runtime::run_until_signal`: the first drains, the second
//! stops waiting for handlers.

/// SIGINT (Ctrl-C) and SIGTERM, listened to from creation on.
pub(super) struct ShutdownSignals {
    #[cfg(unix)]
    interrupt: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    terminate: Option<tokio::signal::unix::Signal>,
}

impl ShutdownSignals {
    pub(super) fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listen = |kind| match signal(kind) {
                Ok(signal) => Some(signal),
                Err(e) => {
                    tracing::error!(error = %e, "cannot listen for a shutdown signal");
                    None
                }
            };
            ShutdownSignals {
                interrupt: listen(SignalKind::interrupt()),
                terminate: listen(SignalKind::terminate()),
            }
        }
        #[cfg(not(unix))]
        ShutdownSignals {}
    }

    /// The next SIGINT or SIGTERM.
    pub(super) async fn next(&mut self) {
        #[cfg(unix)]
        {
            async fn recv(signal: &mut Option<tokio::signal::unix::Signal>) {
                match signal {
                    Some(signal) => {
                        signal.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                _ = recv(&mut self.interrupt) => {}
                _ = recv(&mut self.terminate) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
