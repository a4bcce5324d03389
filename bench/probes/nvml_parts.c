// Build and run on a GPU machine: gcc -O2 -o nvml_parts bench/probes/nvml_parts.c -ldl && ./nvml_parts
// (no CMake target: it needs only libc and the driver; data/watch/h200x2_2026-12-01_nvml_parts.txt is its output).
// CPU cost of each part of trainfit's "counters" read set on this host, per GPU, after 100 ms idle.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <limits.h>
typedef void* dev_t_;
typedef struct { unsigned int fieldId, scopeId; long long timestamp, latencyUsec; int valueType, nvmlReturn; unsigned long long value; } fv_t;
typedef struct { unsigned int pid; unsigned long long usedGpuMemory; unsigned int gi, ci; } proc_t;
static double cpu_us(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int main(void){
  void* h=dlopen("libnvidia-ml.so.1",RTLD_NOW); if(!h){puts("no nvml");return 1;}
  int (*init)(void)=dlsym(h,"nvmlInit_v2"); int (*count)(unsigned*)=dlsym(h,"nvmlDeviceGetCount_v2");
  int (*byidx)(unsigned,dev_t_*)=dlsym(h,"nvmlDeviceGetHandleByIndex_v2");
  int (*fields)(dev_t_,int,fv_t*)=dlsym(h,"nvmlDeviceGetFieldValues");
  int (*procs)(dev_t_,unsigned*,proc_t*)=dlsym(h,"nvmlDeviceGetComputeRunningProcesses_v3");
  if(!procs) procs=dlsym(h,"nvmlDeviceGetComputeRunningProcesses_v2");
  init(); unsigned n=0; count(&n);
  for(unsigned g=0; g<n; ++g){
    dev_t_ d; byidx(g,&d);
    const char* names[]={"pcie rx+tx bytes","nvlink KiB all links (138,139)","nvlink5 bytes all links (202,204)","nvlink KiB link 0","processes","pcie+nvlink KiB (trainfit's call)"};
    for(int part=0; part<6; ++part){
      double tot=0; int rc=0; unsigned long long v=0; const int reps=10;
      for(int r=0;r<reps;++r){
        usleep(100000);
        fv_t f[4]; memset(f,0,sizeof f); int k=0;
        double t0=cpu_us();
        if(part==0){f[0].fieldId=198;f[1].fieldId=197;k=2;rc=fields(d,k,f);}
        else if(part==1){f[0].fieldId=139;f[1].fieldId=138;f[0].scopeId=f[1].scopeId=UINT_MAX;k=2;rc=fields(d,k,f);}
        else if(part==2){f[0].fieldId=204;f[1].fieldId=202;f[0].scopeId=f[1].scopeId=UINT_MAX;k=2;rc=fields(d,k,f);}
        else if(part==3){f[0].fieldId=139;f[1].fieldId=138;f[0].scopeId=f[1].scopeId=0;k=2;rc=fields(d,k,f);}
        else if(part==4){proc_t p[64]; unsigned c=64; rc=procs(d,&c,p);}
        else {f[0].fieldId=198;f[1].fieldId=197;f[2].fieldId=139;f[3].fieldId=138;f[2].scopeId=f[3].scopeId=UINT_MAX;k=4;rc=fields(d,k,f);}
        tot+=cpu_us()-t0; if(k) { rc = rc*100 + f[0].nvmlReturn; v=f[0].value; }
      }
      printf("gpu %u %-36s %8.1f us CPU a call (rc %d, value %llu)\n", g, names[part], tot/reps, rc, v);
    }
  }
  return 0;
}
