# Zero the payload of every fatbin entry that is not the sm_90 cubin (headers kept),
# so that the library compresses small; on an sm_90 device the driver loads the sm_90 cubin.
import struct,sys,subprocess
src,dst=sys.argv[1],sys.argv[2]
b=bytearray(open(src,'rb').read())
for line in subprocess.check_output(['readelf','-SW',src]).decode().splitlines():
    if '] .nv_fatbin ' in line:
        p=line.split(']')[1].split(); off=int(p[3],16); size=int(p[4],16)
pos,end=off,off+size; kept=zeroed=0; n=0
while pos<end:
    magic,ver,hsz,fsz=struct.unpack_from('<IHHQ',b,pos)
    if magic!=0xBA55ED50: pos+=8; continue
    n+=1; e=pos+hsz; fend=pos+hsz+fsz
    while e<fend:
        kind,ever,ehsz,psz=struct.unpack_from('<HHIQ',b,e)
        arch=struct.unpack_from('<I',b,e+28)[0]
        if kind==2 and arch==90: kept+=psz
        else:
            b[e+ehsz:e+ehsz+psz]=bytes(psz); zeroed+=psz
        e+=ehsz+psz
    assert e==fend,(e,fend)
    pos=fend
open(dst,'wb').write(b)
print('fatbins',n,'kept sm_90 bytes',kept,'zeroed',zeroed)
