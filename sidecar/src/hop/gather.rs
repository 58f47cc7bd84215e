//! Bodies read whole for hop compression (a peer's compressed request to
//! restore, TensorFlow's request to compress, a small one to keep as a
//! reference), bounded three ways: in bytes, in memory (each chunk charged
//! to the in-flight budget as it arrives, never on what the sender says it
//! will send) and in time (`limits.gather_seconds`, one deadline for the
//! whole body).

use std::time::Instant;

use http_body_util::BodyExt;
use tlc_proxy::body::{BoxError, Collected, Peeked, ProxyBody};
use tlc_proxy::limits::budget::{Charge, MemoryBudget};

/// Why a body was not read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// It is longer than the limit.
    Long,
    /// The in-flight budget could not hold the next chunk.
    Budget,
    /// It did not end by the deadline.
    Late,
}

/// A body gathered as far as its bounds allowed.
pub(super) enum Gathered {
    /// Read to its end: its bytes, and their charge (hold it as long as
    /// the bytes).
    Whole(Collected, Charge),
    /// Stopped: why, what was read (no longer charged) and the unread rest.
    Stopped(Stop, Peeked),
}

/// Reads `body` to its end if it holds at most `limit` bytes, each chunk
/// charged to `budget` as it arrives (without waiting: the budget is spent
/// means stop), and ends by `deadline`.
pub(super) async fn gather(
    mut body: ProxyBody,
    limit: usize,
    budget: &MemoryBudget,
    deadline: Instant,
) -> Result<Gathered, BoxError> {
    let mut charge = budget.empty();
    let mut collected = Collected::default();
    let mut total = 0usize;
    let stopped =
        |why, collected, body| Ok(Gathered::Stopped(why, Peeked::Partial(collected, body)));
    loop {
        // Dropping `frame()` loses nothing: a pending poll holds no data.
        let frame = match tokio::time::timeout_at(deadline.into(), body.frame()).await {
            Err(_) => return stopped(Stop::Late, collected, body),
            Ok(None) => break,
            Ok(Some(frame)) => frame?,
        };
        match frame.into_data() {
            Ok(chunk) => {
                total = total.saturating_add(chunk.len());
                let long = total > limit;
                let refused = !long && charge.try_grow(chunk.len() as u64).is_err();
                collected.chunks.push(chunk);
                if long {
                    return stopped(Stop::Long, collected, body);
                }
                if refused {
                    return stopped(Stop::Budget, collected, body);
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    collected.trailers = Some(trailers);
                }
            }
        }
    }
    Ok(Gathered::Whole(collected, charge))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;

    /// A body of `chunks`, then nothing more, ever.
    fn unfinished(chunks: Vec<Bytes>) -> ProxyBody {
        let head = futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, BoxError>(http_body::Frame::data(c))),
        );
        let tail = futures_util::stream::pending();
        tlc_proxy::body::stream(http_body_util::StreamBody::new(
            futures_util::StreamExt::chain(head, tail),
        ))
    }

    #[tokio::test]
    async fn what_is_gathered_is_charged_and_bounded_in_time_and_memory() {
        let budget = MemoryBudget::new(64 << 10);
        let whole = tlc_proxy::body::chunks(vec![Bytes::from(vec![1; 10_000])], None);
        let Ok(Gathered::Whole(collected, charge)) = gather(
            whole,
            20_000,
            &budget,
            Instant::now() + Duration::from_secs(5),
        )
        .await
        else {
            panic!("a short body is read whole");
        };
        assert_eq!(collected.len(), 10_000);
        assert!(budget.in_use_bytes() >= 10_000);
        drop(charge);
        assert_eq!(budget.in_use_bytes(), 0);

        let started = Instant::now();
        let late = unfinished(vec![Bytes::from(vec![1; 1000])]);
        let deadline = Instant::now() + Duration::from_millis(100);
        let Ok(Gathered::Stopped(Stop::Late, read)) = gather(late, 20_000, &budget, deadline).await
        else {
            panic!("an unfinished body stops at its deadline");
        };
        assert!(started.elapsed() < Duration::from_secs(2));
        assert!(matches!(read, Peeked::Partial(ref c, _) if c.len() == 1000));
        assert_eq!(budget.in_use_bytes(), 0, "no longer charged once stopped");

        let _held = budget.try_charge(60 << 10).unwrap();
        let chunks = vec![Bytes::from(vec![1; 2048]), Bytes::from(vec![1; 4096])];
        let far = Instant::now() + Duration::from_secs(5);
        let refused = gather(unfinished(chunks), 20_000, &budget, far).await;
        assert!(matches!(refused, Ok(Gathered::Stopped(Stop::Budget, _))));

        let long = unfinished(vec![Bytes::from(vec![1; 30_000])]);
        let refused = gather(long, 20_000, &budget, far).await;
        assert!(matches!(refused, Ok(Gathered::Stopped(Stop::Long, _))));
    }
}
