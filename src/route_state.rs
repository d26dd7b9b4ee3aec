//! What a route keeps across a live reload: the in-memory state of its parts (tasks and sessions, run logs,
//! rate-limit buckets, fetched key sets, callbacks awaited, upstream connections). A reload builds the route
//! anew from its new configuration; each part asks the route's [`RouteState`] for its state instead of
//! making it, and gets the one the route's previous build had when the configuration it depends on is the
//! same. The store's records are keyed by route name already, so they need nothing of this.

use std::any::{Any, TypeId};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use crate::sync::lock;

type Item = Arc<dyn Any + Send + Sync>;

/// A piece of state: its type, and a hash of the configuration it was made with.
type Slot = (TypeId, u64);

/// One route's state, by type and by the configuration each piece depends on.
#[derive(Default)]
pub struct RouteState {
    items: Mutex<HashMap<Slot, Item>>,
    /// The route's previous build's, while this one is built: what it asks for is taken from there.
    earlier: Mutex<HashMap<Slot, Item>>,
}

impl RouteState {
    /// For a new build of a route whose previous build kept `earlier`.
    pub fn after(earlier: &RouteState) -> Self {
        let items = lock(&earlier.items).clone();
        Self {
            items: Mutex::default(),
            earlier: Mutex::new(items),
        }
    }

    /// The state of type `T` made with the configuration `made_with`: the previous build's if it had one
    /// made with the same, else `make()`'s.
    pub fn keep<T: Send + Sync + 'static>(
        &self,
        made_with: impl Hash,
        make: impl FnOnce() -> T,
    ) -> Arc<T> {
        let mut hasher = DefaultHasher::new();
        made_with.hash(&mut hasher);
        let slot = (TypeId::of::<T>(), hasher.finish());
        let mut items = lock(&self.items);
        let item = match items.get(&slot) {
            Some(item) => Arc::clone(item),
            None => {
                let item = lock(&self.earlier)
                    .remove(&slot)
                    .unwrap_or_else(|| Arc::new(make()));
                items.insert(slot, Arc::clone(&item));
                item
            }
        };
        // The slot's type is `T`: it is part of the key.
        item.downcast::<T>()
            .unwrap_or_else(|_| unreachable!("a kept item has its slot's type"))
    }

    /// The build is done: what the previous build kept and this one did not ask for is let go.
    pub fn settle(&self) {
        lock(&self.earlier).clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rebuild_gets_the_state_made_with_the_same_configuration() {
        let first = RouteState::default();
        let buckets = first.keep(60u32, || Mutex::new(vec![1]));
        let other = first.keep((), || 7u64);
        first.settle();

        let second = RouteState::after(&first);
        assert!(Arc::ptr_eq(
            &buckets,
            &second.keep(60u32, || Mutex::new(Vec::<i32>::new()))
        ));
        assert!(!Arc::ptr_eq(
            &buckets,
            &second.keep(120u32, || Mutex::new(Vec::<i32>::new()))
        ));
        second.settle();

        let third = RouteState::after(&second);
        assert_eq!(
            *third.keep((), || 9u64),
            9,
            "not asked for in the second build"
        );
        assert!(Arc::ptr_eq(
            &second.keep(60u32, || Mutex::new(Vec::<i32>::new())),
            &third.keep(60u32, || Mutex::new(Vec::<i32>::new()))
        ));
        drop(other);
    }
}
