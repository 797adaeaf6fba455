//! Proxmox VE guests: the archives `vzdump` writes (VMA for virtual
//! machines), read as streams and turned into files a snapshot holds (one
//! sparse image per disk, the guest's configuration), and written back.

pub mod api;
pub mod archive;
pub mod boot;
pub mod extract;
pub mod ingest;
pub mod lxc;
pub mod qcow2;
pub mod staging;
pub mod to_vma;
pub mod vma;
