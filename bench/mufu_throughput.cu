// Microbenchmark: cycles per warp instruction of ex2.approx.ftz.f32 and cvt.rn.bf16x2.f32 on one SM
// partition (one block of 4, 8 or 16 warps: 1, 2 or 4 per partition), back to back in 16
// independent chains, timed by clock64. Build: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a
// bench/mufu_throughput.cu -o mufu_throughput. Result on the H100: docs/perf/forward-hopper.md
// (fourth pass).
#include <cstdio>
__device__ __forceinline__ float ex2(float x){float y; asm volatile("ex2.approx.ftz.f32 %0, %1;":"=f"(y):"f"(x)); return y;}
__device__ __forceinline__ unsigned cvt(float a,float b){unsigned y; asm volatile("cvt.rn.bf16x2.f32 %0, %1, %2;":"=r"(y):"f"(a),"f"(b)); return y;}
template<int MODE>
__global__ void k(float* out, long long* cyc, int iters){
  float v[16];
  for(int i=0;i<16;i++) v[i]=threadIdx.x*1e-3f+i*1e-4f;
  unsigned acc=0;
  __syncwarp();
  long long t0=clock64();
  for(int it=0;it<iters;it++){
#pragma unroll
    for(int i=0;i<16;i++){
      if(MODE==0) v[i]=ex2(v[i]);
      else if(MODE==1) acc+=cvt(v[i],v[(i+1)&15]), v[i]+=1e-7f;
      else { float x=fmaf(v[i],1.0001f,-0.5f); float p=ex2(x); v[i]=p+v[i]*1e-3f; }
    }
  }
  long long t1=clock64();
  float s=acc; for(int i=0;i<16;i++) s+=v[i];
  out[blockIdx.x*blockDim.x+threadIdx.x]=s;
  if(threadIdx.x%32==0) cyc[threadIdx.x/32]=t1-t0;
}
int main(){
  float* o; long long* c; cudaMalloc(&o,1<<20); cudaMalloc(&c,1024);
  int iters=1000;
  const char* names[]={"ex2","cvt.bf16x2","ffma+ex2+fadd"};
  for(int mode=0;mode<3;mode++) for(int warps: {4,8,16}){
    long long h[32];
    for(int rep=0;rep<2;rep++){
    if(mode==0) k<0><<<1,warps*32>>>(o,c,iters);
    if(mode==1) k<1><<<1,warps*32>>>(o,c,iters);
    if(mode==2) k<2><<<1,warps*32>>>(o,c,iters);
    cudaDeviceSynchronize();}
    cudaMemcpy(h,c,8*warps,cudaMemcpyDeviceToHost);
    // warps per SM partition = warps/4; instructions per warp = iters*16
    printf("%-14s warps/SMSP=%2d  cycles per warp-instr per SMSP: %.2f\n",names[mode],warps/4,(double)h[0]/(iters*16.0)/(warps/4));
  }
}
