//! Sources beyond plain file systems: hypervisors whose guests Vouch backs
//! up from their own backup formats.

pub mod proxmox;
