//! Locking shared state.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, poisoned or not: every critical section in this crate leaves plain data whole, so a panic
/// elsewhere while it was held leaves nothing to distrust.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
