//! One budget for the bytes tlcd holds on behalf of calls in flight.
//!
//! Contexts and fallbacks have their own bounds (their tables). What this
//! budget bounds is everything else that a peer's behaviour decides: the
//! responses being read to be compressed, the envelopes being read and the
//! tensors being decoded from them, and the bytes handed to a client that
//! does not read them. A call takes a [`Charge`] before it holds the bytes
//! and the charge goes back when the bytes do, so the sum stays under the
//! budget whatever the peers do; a call that cannot get its charge either
//! waits (a decode, which has no other way) or streams the bytes through
//! untouched (a response that did not need to be read whole).
//!
//! Charges are counted in KiB, rounded up, so that the semaphore's 32-bit
//! acquisitions cover a 4 TiB budget.

use std::sync::Arc;
use std::time::Duration;

use std::task::{Context, Poll};

use thiserror::Error;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio_util::sync::PollSemaphore;

/// Bytes per permit.
const UNIT: u64 = 1024;

/// Why a charge was not granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum BudgetError {
    /// The request is larger than the whole budget: it can never be granted.
    #[error("{bytes} bytes is more than the whole in-flight memory budget ({budget} bytes)")]
    TooLarge {
        /// What was asked for.
        bytes: u64,
        /// The whole budget.
        budget: u64,
    },
    /// The budget is spent by other calls right now.
    #[error("the in-flight memory budget ({budget} bytes) is spent by other calls")]
    Exhausted {
        /// The whole budget.
        budget: u64,
    },
}

/// The in-flight memory budget, shared by every call of the sidecar.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    permits: Arc<Semaphore>,
    units: u32,
}

/// Bytes held against the budget; given back when dropped.
#[derive(Debug)]
pub struct Charge {
    permit: Option<OwnedSemaphorePermit>,
    budget: MemoryBudget,
}

impl MemoryBudget {
    /// A budget of `bytes` (rounded up to a KiB, at most 4 TiB).
    pub fn new(bytes: u64) -> MemoryBudget {
        let units = u32::try_from(units_of(bytes)).unwrap_or(u32::MAX);
        MemoryBudget {
            permits: Arc::new(Semaphore::new(units as usize)),
            units,
        }
    }

    /// The whole budget in bytes.
    pub fn total_bytes(&self) -> u64 {
        u64::from(self.units) * UNIT
    }

    /// Bytes charged right now.
    pub fn in_use_bytes(&self) -> u64 {
        let free = self.permits.available_permits() as u64;
        (u64::from(self.units) - free.min(u64::from(self.units))) * UNIT
    }

    /// A charge of nothing, to grow with [`Charge::try_grow`] or [`Charge::grow`].
    pub fn empty(&self) -> Charge {
        Charge {
            permit: None,
            budget: self.clone(),
        }
    }

    /// `bytes` now, or an error saying why not.
    pub fn try_charge(&self, bytes: u64) -> Result<Charge, BudgetError> {
        let mut charge = self.empty();
        charge.try_grow(bytes)?;
        Ok(charge)
    }

    /// `bytes`, waiting up to `wait` for other calls to give theirs back.
    pub async fn charge(&self, bytes: u64, wait: Duration) -> Result<Charge, BudgetError> {
        let mut charge = self.empty();
        charge.grow(bytes, wait).await?;
        Ok(charge)
    }

    /// A poller for charges taken from inside `poll` functions (a body
    /// being streamed), where there is no future to await.
    pub fn poller(&self) -> ChargePoller {
        ChargePoller {
            semaphore: PollSemaphore::new(Arc::clone(&self.permits)),
            budget: self.clone(),
        }
    }

    fn units_for(&self, bytes: u64) -> Result<u32, BudgetError> {
        let too_large = BudgetError::TooLarge {
            bytes,
            budget: self.total_bytes(),
        };
        let units = units_of(bytes);
        if units > u64::from(self.units) {
            return Err(too_large);
        }
        u32::try_from(units).map_err(|_| too_large)
    }
}

impl Charge {
    /// Bytes this charge holds.
    pub fn bytes(&self) -> u64 {
        self.permit
            .as_ref()
            .map_or(0, |p| p.num_permits() as u64 * UNIT)
    }

    /// Adds `bytes` now, or says why not (the charge is unchanged then).
    pub fn try_grow(&mut self, bytes: u64) -> Result<(), BudgetError> {
        let units = self.budget.units_for(self.bytes().saturating_add(bytes))?;
        let more = units.saturating_sub(self.units());
        if more == 0 {
            return Ok(());
        }
        match Arc::clone(&self.budget.permits).try_acquire_many_owned(more) {
            Ok(permit) => {
                self.merge(permit);
                Ok(())
            }
            Err(TryAcquireError::NoPermits | TryAcquireError::Closed) => {
                Err(BudgetError::Exhausted {
                    budget: self.budget.total_bytes(),
                })
            }
        }
    }

    /// Adds `bytes`, waiting up to `wait` for them.
    pub async fn grow(&mut self, bytes: u64, wait: Duration) -> Result<(), BudgetError> {
        let units = self.budget.units_for(self.bytes().saturating_add(bytes))?;
        let more = units.saturating_sub(self.units());
        if more == 0 {
            return Ok(());
        }
        let exhausted = BudgetError::Exhausted {
            budget: self.budget.total_bytes(),
        };
        let acquire = Arc::clone(&self.budget.permits).acquire_many_owned(more);
        match tokio::time::timeout(wait, acquire).await {
            Ok(Ok(permit)) => {
                self.merge(permit);
                Ok(())
            }
            Ok(Err(_)) | Err(_) => Err(exhausted),
        }
    }

    fn units(&self) -> u32 {
        self.permit
            .as_ref()
            .map_or(0, |p| u32::try_from(p.num_permits()).unwrap_or(u32::MAX))
    }

    fn merge(&mut self, permit: OwnedSemaphorePermit) {
        match self.permit.as_mut() {
            Some(held) => held.merge(permit),
            None => self.permit = Some(permit),
        }
    }
}

/// Takes charges from `poll` functions; see [`MemoryBudget::poller`].
#[derive(Debug)]
pub struct ChargePoller {
    semaphore: PollSemaphore,
    budget: MemoryBudget,
}

impl ChargePoller {
    /// A charge of `bytes` once the budget has it. A request larger than
    /// the whole budget is granted the whole budget: it waits for every
    /// other charge to come back rather than forever.
    pub fn poll_charge(&mut self, cx: &mut Context<'_>, bytes: u64) -> Poll<Charge> {
        let units = units_of(bytes).min(u64::from(self.budget.units));
        let units = u32::try_from(units).unwrap_or(u32::MAX);
        if units == 0 {
            return Poll::Ready(self.budget.empty());
        }
        match self.semaphore.poll_acquire_many(cx, units) {
            Poll::Ready(permit) => Poll::Ready(Charge {
                // The semaphore is never closed; `None` would mean it was,
                // and then nothing is charged.
                permit,
                budget: self.budget.clone(),
            }),
            Poll::Pending => Poll::Pending,
        }
    }
}

fn units_of(bytes: u64) -> u64 {
    bytes.div_ceil(UNIT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_add_up_and_come_back_when_dropped() {
        let budget = MemoryBudget::new(10 * UNIT);
        let a = budget.try_charge(4 * UNIT).unwrap();
        let mut b = budget.try_charge(1).unwrap();
        assert_eq!(b.bytes(), UNIT, "rounded up to a KiB");
        assert_eq!(budget.in_use_bytes(), 5 * UNIT);
        assert_eq!(
            budget.try_charge(6 * UNIT).unwrap_err(),
            BudgetError::Exhausted { budget: 10 * UNIT }
        );
        b.try_grow(5 * UNIT).unwrap();
        assert_eq!(budget.in_use_bytes(), 10 * UNIT);
        assert!(b.try_grow(1).is_err());
        assert_eq!(b.bytes(), 6 * UNIT, "a refused growth changes nothing");
        drop(a);
        drop(b);
        assert_eq!(budget.in_use_bytes(), 0);
    }

    #[test]
    fn more_than_the_whole_budget_is_never_granted() {
        let budget = MemoryBudget::new(10 * UNIT);
        assert!(matches!(
            budget.try_charge(10 * UNIT + 1),
            Err(BudgetError::TooLarge { .. })
        ));
        assert!(matches!(
            budget.try_charge(u64::MAX),
            Err(BudgetError::TooLarge { .. })
        ));
        let mut charge = budget.try_charge(5 * UNIT).unwrap();
        assert!(matches!(
            charge.try_grow(6 * UNIT),
            Err(BudgetError::TooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn a_waiting_charge_gets_what_another_gives_back() {
        let budget = MemoryBudget::new(10 * UNIT);
        let held = budget.try_charge(8 * UNIT).unwrap();
        let waiting = {
            let budget = budget.clone();
            tokio::spawn(async move { budget.charge(5 * UNIT, Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        drop(held);
        let granted = waiting.await.unwrap().unwrap();
        assert_eq!(granted.bytes(), 5 * UNIT);
        let timed_out = budget.charge(6 * UNIT, Duration::from_millis(20)).await;
        assert!(matches!(timed_out, Err(BudgetError::Exhausted { .. })));
    }
}
