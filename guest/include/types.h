#ifndef DIRQ_TYPES_H
#define DIRQ_TYPES_H

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long u64;
typedef long i64;

#endif
