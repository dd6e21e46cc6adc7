//! The clone itself: `clone3(CLONE_VM | CLONE_VFORK [| CLONE_INTO_CGROUP])`
//! onto a stack of the child's own, and the child's few steps to `exec`.
//!
//! This is one of the agent's two modules with `unsafe` (the other is
//! `crate::entropy`), for four things no safe wrapper offers:
//!
//! - the stack ([`ChildStack`]): an anonymous mapping with a guard page
//!   below it, so an overflow faults instead of writing into the heap;
//! - the clone: libc's `clone` wrapper knows no `clone3` (which
//!   `CLONE_INTO_CGROUP` needs) and rustix has none, and a child that
//!   returned through Rust frames on the agent's stack would overwrite
//!   them, so a few instructions of assembly call [`child_main`] on the new
//!   stack, from which nothing returns;
//! - the signal mask and handlers, through raw `rt_sigprocmask` and
//!   `rt_sigaction` (libc's `sigaction` takes a lock for `SIGABRT`);
//! - `execve`, which takes raw pointer arrays.
//!
//! Why the child is sound although it shares the agent's memory:
//!
//! - the calling thread sleeps until the child `exec`s or exits
//!   (`CLONE_VFORK`), so what the child touches of that thread (its
//!   thread-local `errno`, the [`Launch`] and the pointer arrays it
//!   borrows) does not change under it, and what the child writes (the
//!   errno it failed with, in an atomic) is read only after;
//! - the other threads run on, but the child touches nothing they own: it
//!   allocates nothing, takes no lock, and makes only system calls (through
//!   rustix's raw wrappers, and `libc::syscall`/`execve` here, whose only
//!   side effect in memory is that sleeping thread's `errno`);
//! - all signals are blocked from before the clone until the child has set
//!   every handler back to its default, so no agent handler ever runs in
//!   the child;
//! - the stack is used by one clone at a time: [`Launch::spawn`] takes it
//!   by `&mut`.

#![allow(unsafe_code)]

use std::ffi::{c_char, c_void, CString};
use std::io;
use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::errno::Errno;
use nix::libc;
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use super::Launch;

#[cfg(not(target_arch = "x86_64"))]
compile_error!("spawn::vfork's clone3 call is written for x86_64 only; port `clone3` first");

const CLONE_VM: u64 = libc::CLONE_VM as u64;
const CLONE_VFORK: u64 = libc::CLONE_VFORK as u64;
/// Linux 5.7+; the guest kernel is built for it.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The child's stack: ample for a handful of system calls through rustix.
const STACK_BYTES: usize = 128 * 1024;
/// One page below it, never mapped readable or writable.
const GUARD_BYTES: usize = 4096;

/// The signals an `rt_sigaction`/`rt_sigprocmask` call covers on x86_64.
const SIGSET_BYTES: usize = 8;
const LAST_SIGNAL: i32 = 64;

/// `struct clone_args` (linux/sched.h), up to `cgroup` (its second
/// version, 88 bytes).
#[repr(C)]
#[derive(Debug, Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// The kernel's `struct sigaction` on x86_64, as `rt_sigaction` takes it.
#[repr(C)]
#[derive(Debug, Default)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// A stack for the child of a clone: 128 KiB above a guard page.
#[derive(Debug)]
pub struct ChildStack {
    base: *mut c_void,
}

// SAFETY: the mapping belongs to this value alone (nothing else holds
// `base`), and it is only used through `&mut self`, so moving it to
// another thread is moving the ownership of plain memory.
unsafe impl Send for ChildStack {}

impl ChildStack {
    /// Maps a new stack.
    pub fn new() -> io::Result<Self> {
        // SAFETY: a new anonymous private mapping, at an address the kernel
        // picks, overlaps nothing of ours.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                GUARD_BYTES + STACK_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Self { base };
        // SAFETY: the first page of the mapping just made, which nothing
        // uses yet.
        if unsafe { libc::mprotect(base, GUARD_BYTES, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The lowest usable address and the size above it, as `clone3` takes
    /// them.
    fn span(&mut self) -> (u64, u64) {
        (self.base as u64 + GUARD_BYTES as u64, STACK_BYTES as u64)
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the whole mapping `new` made; no clone is using it (that
        // needs `&mut self`, and a clone returns only once its child has
        // left the stack).
        unsafe {
            libc::munmap(self.base, GUARD_BYTES + STACK_BYTES);
        }
    }
}

/// What the child reads, and the errno it writes back.
struct Ctx<'a> {
    launch: &'a Launch,
    argv: *const *const c_char,
    envp: *const *const c_char,
    failed: AtomicI32,
}

/// Starts `launch` (see [`Launch::spawn`]).
pub(super) fn spawn(launch: &Launch, stack: &mut ChildStack) -> io::Result<u32> {
    let argv = null_terminated(&launch.argv);
    let envp = null_terminated(&launch.env);
    let ctx = Ctx {
        launch,
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        failed: AtomicI32::new(0),
    };
    let (stack_low, stack_size) = stack.span();
    let mut args = CloneArgs {
        flags: CLONE_VM | CLONE_VFORK,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack_low,
        stack_size,
        ..CloneArgs::default()
    };
    if let Some(cgroup) = &launch.cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = cgroup.as_raw_fd() as u64;
    }
    let previous = set_mask(libc::SIG_SETMASK, u64::MAX)?;
    // SAFETY: `args` describes a stack nothing else uses (`stack` is
    // borrowed mutably) and `ctx` outlives the child's use of it: with
    // CLONE_VFORK this thread resumes only once the child has exec'd or
    // exited. The child runs `child_main` alone (see the module docs).
    let result = unsafe { clone3(&args, ptr::from_ref(&ctx).cast_mut().cast()) };
    // Restoring the mask of a thread that had it a moment ago cannot fail.
    let _ = set_mask(libc::SIG_SETMASK, previous);
    let pid = i32::try_from(result).unwrap_or(-libc::EINVAL);
    if pid < 0 {
        return Err(io::Error::from_raw_os_error(-pid));
    }
    match ctx.failed.load(Ordering::Acquire) {
        0 => Ok(pid.unsigned_abs()),
        errno => {
            reap(pid);
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// Waits for a child that failed before `exec` (it has exited or is about
/// to).
fn reap(pid: i32) {
    loop {
        match waitpid(Pid::from_raw(pid), None) {
            Err(Errno::EINTR) => continue,
            Ok(_) | Err(_) => return,
        }
    }
}

/// Pointers to `strings` followed by a null pointer, as `execve` takes them.
fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(ptr::null()))
        .collect()
}

/// Sets the calling thread's signal mask; returns the previous one.
fn set_mask(how: libc::c_int, mask: u64) -> io::Result<u64> {
    let mut previous = 0u64;
    // SAFETY: both pointers are to live u64s, the size of the kernel's
    // sigset on x86_64.
    let r = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            how,
            ptr::from_ref(&mask),
            ptr::from_mut(&mut previous),
            SIGSET_BYTES,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(previous)
}

/// `clone3(args)`; in the child, `child_main(arg)` on the new stack.
/// Returns the child's pid, or a negative errno.
///
/// # Safety
///
/// `args` must name a stack nobody else uses and `arg` must be a `Ctx`
/// that stays valid until the child execs or exits, which `CLONE_VFORK`
/// in `args.flags` guarantees by suspending the caller until then.
unsafe fn clone3(args: &CloneArgs, arg: *mut c_void) -> isize {
    let result: isize;
    // SAFETY: the caller's contract. The parent's path is the system call
    // and a jump (rcx and r11 are clobbered by `syscall`, rdi and rsi left
    // as they were). The child's path starts on the new stack (16-byte
    // aligned, so `call` leaves it as a function expects) and never comes
    // back: `child_main` ends in `exec` or `_exit`, and `ud2` stops a
    // return that cannot happen.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 as isize => result,
            inlateout("rdi") ptr::from_ref(args) => _,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            in("r13") child_main as extern "C" fn(*mut c_void) -> !,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    result
}

/// The child: set up, then `exec`; on failure leave the errno for the
/// parent and exit.
extern "C" fn child_main(arg: *mut c_void) -> ! {
    // SAFETY: `arg` is the `Ctx` `spawn` passed, alive while the parent
    // sleeps (CLONE_VFORK).
    let ctx = unsafe { &*arg.cast::<Ctx<'_>>() };
    let errno = match ctx.launch.enter() {
        Ok(()) => {
            default_signal_handlers();
            let _ = set_mask(libc::SIG_SETMASK, 0);
            exec(ctx)
        }
        Err(errno) => errno.raw_os_error(),
    };
    ctx.failed.store(errno.max(1), Ordering::Release);
    // SAFETY: `_exit` is the raw `exit_group`: no handlers, no flushing,
    // nothing of the agent's touched.
    unsafe { libc::_exit(127) }
}

/// Every caught signal back to its default action, and `SIGPIPE` too (the
/// Rust runtime ignores it in the agent; programs expect the default).
/// Ignored signals stay ignored, as they would across `exec`.
fn default_signal_handlers() {
    for signal in 1..=LAST_SIGNAL {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        let mut current = KernelSigaction::default();
        // SAFETY: reads the action into a live struct of the kernel's
        // layout; the new action pointer is null.
        let r = unsafe { sigaction(signal, ptr::null(), ptr::from_mut(&mut current)) };
        let caught = current.handler != libc::SIG_DFL && current.handler != libc::SIG_IGN;
        if r == 0 && (caught || signal == libc::SIGPIPE) {
            let default = KernelSigaction::default();
            // SAFETY: SIG_DFL (0) with no flags, no restorer, no mask.
            unsafe { sigaction(signal, ptr::from_ref(&default), ptr::null_mut()) };
        }
    }
}

/// Raw `rt_sigaction`.
///
/// # Safety
///
/// `new` and `old` must each be null or point to a live `KernelSigaction`.
unsafe fn sigaction(signal: i32, new: *const KernelSigaction, old: *mut KernelSigaction) -> i64 {
    // SAFETY: the caller's contract; the kernel reads `new` and writes `old`.
    unsafe { libc::syscall(libc::SYS_rt_sigaction, signal, new, old, SIGSET_BYTES) }
}

/// `execve`s each candidate in turn; returns the errno `execvp` would
/// have left.
fn exec(ctx: &Ctx<'_>) -> i32 {
    let mut denied = false;
    for path in &ctx.launch.candidates {
        // SAFETY: `path` is a C string, `argv` and `envp` null-terminated
        // arrays of C strings, all owned by the sleeping parent. It returns
        // only on failure.
        unsafe { libc::execve(path.as_ptr(), ctx.argv, ctx.envp) };
        match Errno::last() {
            Errno::EACCES => denied = true,
            Errno::ENOENT | Errno::ENOTDIR => {}
            other => return other as i32,
        }
    }
    if denied {
        libc::EACCES
    } else {
        libc::ENOENT
    }
}
