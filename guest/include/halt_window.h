/*
 * HALT_WINDOW_FIXUP, for every interrupt entry (pvm.S explains the window).
 * `rip` is where the interrupted RIP sits relative to %rsp at the point of
 * use. Outside kvm_pvm's native mode the window never runs, so the check
 * never matches; it costs two compares.
 */
#ifndef DIRQ_HALT_WINDOW_H
#define DIRQ_HALT_WINDOW_H

#ifdef __ASSEMBLER__
.macro HALT_WINDOW_FIXUP rip
    cmpq $pvm_halt_window_start, \rip(%rsp)
    jb 9f
    cmpq $pvm_halt_window_end, \rip(%rsp)
    jae 9f
    movq $pvm_halt_window_end, \rip(%rsp)
9:
.endm
#endif

#endif
