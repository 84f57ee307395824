module CCU2C(input CIN, A0, B0, C0, D0, A1, B1, C1, D1, output S0, S1, COUT);
  // the ECP5 carry cell as the proofs need it: INJECT1_0 = INJECT1_1 = "NO" (the only setting used)
  parameter [15:0] INIT0 = 16'h0000;
  parameter [15:0] INIT1 = 16'h0000;
  parameter INJECT1_0 = "NO";
  parameter INJECT1_1 = "NO";
  wire [15:0] i0 = INIT0, i1 = INIT1;
  wire l40 = i0[{D0, C0, B0, A0}];
  wire g0 = i0[{B0, A0}];
  assign S0 = l40 ^ CIN;
  wire cout0 = l40 ? CIN : g0;
  wire l41 = i1[{D1, C1, B1, A1}];
  wire g1 = i1[{B1, A1}];
  assign S1 = l41 ^ cout0;
  assign COUT = l41 ? cout0 : g1;
endmodule
