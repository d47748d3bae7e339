/*
 * io-batch (mechanisms.md section 8): disk commands to the VMM's ATA task
 * file, each the 11 port writes of an LBA48 WRITE SECTORS EXT setup. With
 * args[0] the driver records them (port, size, value) in a struct
 * dirq_io_batch and rings one doorbell with its address instead: the VMM
 * replays them in order, so 11 exits become one and the disk ends in the
 * same state.
 */
#include "bench.h"
#include "kernel.h"
#include "x86.h"

#define TF(reg) (DIRQ_PORT_TASK_FILE + (reg))
#define TF_FEATURES TF(1)
#define TF_SECTOR_COUNT TF(2)
#define TF_LBA_LOW TF(3)
#define TF_LBA_MID TF(4)
#define TF_LBA_HIGH TF(5)
#define TF_DEVICE TF(6)
#define TF_COMMAND TF(7)
#define DEVICE_LBA 0x40
#define ATA_WRITE_SECTORS_EXT 0x34

static struct dirq_io_batch batch;

/* One LBA48 WRITE SECTORS EXT setup, high-order bytes of the 48-bit fields
 * first: WRITE(port, value) once per port write, 11 in all. Listed once so
 * both ways of issuing it write the same thing. */
#define COMMAND_WRITES(WRITE, lba, sectors)                                                        \
    WRITE(TF_SECTOR_COUNT, (sectors) >> 8)                                                         \
    WRITE(TF_LBA_LOW, (lba) >> 24)                                                                 \
    WRITE(TF_LBA_MID, (lba) >> 32)                                                                 \
    WRITE(TF_LBA_HIGH, (lba) >> 40)                                                                \
    WRITE(TF_SECTOR_COUNT, (sectors))                                                              \
    WRITE(TF_LBA_LOW, (lba))                                                                       \
    WRITE(TF_LBA_MID, (lba) >> 8)                                                                  \
    WRITE(TF_LBA_HIGH, (lba) >> 16)                                                                \
    WRITE(TF_DEVICE, DEVICE_LBA)                                                                   \
    WRITE(TF_FEATURES, 0)                                                                          \
    WRITE(TF_COMMAND, ATA_WRITE_SECTORS_EXT)

#define OUT(port, value) outb(port, (u8)(value));
#define RECORD(port, value) batch.entries[n++] = (struct dirq_io_batch_entry){(port), 1, 0, (u8)(value)};

static void run(void)
{
    int batched = shared->args[0] != 0;

    control(DIRQ_CONTROL_BENCH_START);
    u64 start = rdtsc();
    /* A different sector each time, so the disk's digest sees the order. */
    for (u64 i = 0; i < shared->count; i++) {
        u64 lba = i * 8;
        if (batched) {
            u32 n = 0;
            COMMAND_WRITES(RECORD, lba, 8)
            batch.count = n;
            outl(DIRQ_PORT_IO_BATCH, (u32)(u64)&batch);
        } else {
            COMMAND_WRITES(OUT, lba, 8)
        }
    }
    u64 cycles = rdtsc() - start;
    control(DIRQ_CONTROL_BENCH_END);

    shared->result[DIRQ_RESULT_IO_BATCH_CYCLES] = cycles;
}

const struct bench bench_io_batch = {DIRQ_BENCH_IO_BATCH, "io-batch", run, 0};
