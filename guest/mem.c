/* gcc may emit calls to these even in freestanding code (struct copies). */
#include "types.h"

void *memset(void *dest, int value, u64 len)
{
    u8 *d = dest;
    while (len--)
        *d++ = (u8)value;
    return dest;
}

void *memcpy(void *dest, const void *src, u64 len)
{
    u8 *d = dest;
    const u8 *s = src;
    while (len--)
        *d++ = *s++;
    return dest;
}
